package httpmw_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// An http.Client whose requests go through retry → breaker → attempt
// timeout.
func Example() {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // the first attempt fails
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	r, _ := retry.New(retry.MaxAttempts(3), retry.Exponential(10*time.Millisecond, time.Second))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	attempt, _ := timeout.New(2 * time.Second)
	c, _ := chain.New(r, b, attempt)

	client := &http.Client{Transport: httpmw.NewTransport(http.DefaultTransport, c)}
	resp, err := client.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), calls)
	// Output: 200 hello 2
}
