// Package layering holds the test that keeps the package dependency
// direction honest (the table of the README's package map): it fails when a package imports
// (directly or not, outside tests) a package of this module it must not.
package layering
