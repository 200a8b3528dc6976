package httpmw_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/preset"
)

// TestStandard: the preset keeps a recommended chain per host, so a host
// that fails every call for the preset's DefaultConsecutiveFor trips its
// own breaker and not the other's; a bad setting is an error at
// construction.
func TestStandard(t *testing.T) {
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		status := 200
		if r.URL.Host == "down.test" {
			status = 503
		}
		return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
	synctest.Test(t, func(t *testing.T) {
		tr, err := httpmw.Standard(base, preset.Settings{Backoff: time.Millisecond, MaxBackoff: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		get := func(host string) error {
			resp, err := tr.RoundTrip(must(http.NewRequest(http.MethodGet, "http://"+host+"/", nil)))
			if err == nil {
				_ = resp.Body.Close()
			}
			return err
		}
		for range 8 { // 3 attempts every 100 ms: 10 in a row over 500 ms trip the rule
			_ = get("down.test")
			if err := get("up.test"); err != nil {
				t.Fatalf("up.test: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		states := map[string]breaker.State{}
		for _, s := range tr.Breakers() {
			states[s.Key] = s.State
		}
		if len(states) != 2 || states["down.test"] != breaker.StateOpen || states["up.test"] != breaker.StateClosed {
			t.Errorf("breakers by host %v, want down.test open and up.test closed", states)
		}
	})
	if _, err := httpmw.Standard(base, preset.Settings{Attempts: -1}); err == nil || !strings.Contains(err.Error(), "Attempts") {
		t.Errorf("Standard with Attempts -1: %v, want an error naming it", err)
	}
}
