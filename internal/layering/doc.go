// Package layering holds the test that keeps the package dependency
// direction of DESIGN.md section 2 honest: it fails when a package imports
// (directly or not, outside tests) a package of this module it must not.
package layering
