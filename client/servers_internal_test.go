package client

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLearntServersNeverWeakenTheScheme(t *testing.T) {
	s := newServers([]string{"https://a.example.com"})
	require.True(t, s.learn([]string{
		"https://a.example.com", // configured already
		"https://b.example.com",
		"http://c.example.com",          // plaintext after TLS: refused
		"ws://d.example.com",            // likewise
		"wss://e.example.com",           //
		"https://b.example.com",         // twice
		"ftp://f.example.com",           // not a server URL
		"https://user@g.example.com",    // user info
		"https://h.example.com/?a=b",    // a query
		"https://i.example.com#section", // a fragment
	}))
	require.Equal(t, []string{"https://a.example.com", "https://b.example.com", "wss://e.example.com"}, s.all())
	require.False(t, s.learn([]string{"https://b.example.com", "wss://e.example.com"}), "the same list is no change")

	plain := newServers([]string{"http://127.0.0.1:8080"})
	require.True(t, plain.learn([]string{"http://127.0.0.1:8081", "https://n.example.com"}))
	require.Equal(t, []string{"http://127.0.0.1:8080", "http://127.0.0.1:8081", "https://n.example.com"}, plain.all())
	require.True(t, plain.learn(nil), "a welcome without servers forgets what was learnt")
	require.Equal(t, []string{"http://127.0.0.1:8080"}, plain.all())
}
