package examples_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/preset"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A first program (docs/first-program.md): an HTTP and a gRPC client
// through httpmw.Standard and grpcmw.Standard, with metrics, logs and
// traces; each downstream is stopped (nothing listens on its address),
// the breaker opens and the callers fail fast, then it is restarted on the
// same address and the breaker closes after its probes.
func Example_firstProgram() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
		// Without the time and the key (the address, a new port each run),
		// so that the Output below is the same every run.
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "key" {
				return slog.Attr{}
			}
			return a
		},
	}))
	settings := preset.Settings{OpenTimeout: 200 * time.Millisecond, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}

	// The HTTP downstream, and a client with the recommended chain per host.
	httpAddr, stopHTTP := serveHTTP("")
	tr, err := httpmw.Standard(http.DefaultTransport, settings,
		httpmw.Metrics(mp), httpmw.Logger(logger), httpmw.Tracing(tp), httpmw.Client("catalog-http"))
	if err != nil {
		fmt.Println(err)
		return
	}
	httpClient := &http.Client{Transport: tr}
	tracer := tp.Tracer("first-program")
	get := func() error {
		ctx, span := tracer.Start(context.Background(), "GET /")
		defer span.End()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/", nil)
		resp, err := httpClient.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}

	// The gRPC downstream, and a client with the recommended chain per method.
	grpcAddr, stopGRPC := serveGRPC("")
	ic, err := grpcmw.Standard(settings, grpcmw.Idempotent(healthpb.Health_Check_FullMethodName),
		grpcmw.Metrics(mp), grpcmw.Logger(logger), grpcmw.Tracing(tp), grpcmw.Client("catalog-grpc"))
	if err != nil {
		fmt.Println(err)
		return
	}
	conn, err := grpc.NewClient(grpcAddr, append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	check := func() error {
		ctx, span := tracer.Start(context.Background(), "Health/Check")
		defer span.End()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}

	for _, d := range []struct {
		name    string
		call    func() error
		stop    func()
		restart func()
	}{
		{"http", get, func() { stopHTTP() }, func() { _, stopHTTP = serveHTTP(httpAddr) }},
		{"grpc", check, func() { stopGRPC() }, func() { _, stopGRPC = serveGRPC(grpcAddr) }},
	} {
		fmt.Printf("%s healthy: %v\n", d.name, d.call())
		d.stop()
		calls := 0
		for err := d.call(); !errors.Is(err, breaker.ErrOpen) && calls < 100; err = d.call() {
			// Each fails after 3 attempts, until 10 failures in a row over
			// at least 500 ms open the breaker: a call every 200 ms.
			calls++
			time.Sleep(200 * time.Millisecond)
		}
		start := time.Now()
		err := d.call()
		fmt.Printf("%s stopped: the breaker opened after %d calls; the next fails fast (%t): %v\n",
			d.name, calls, time.Since(start) < 100*time.Millisecond, errors.Is(err, breaker.ErrOpen))
		d.restart()
		time.Sleep(settings.OpenTimeout + 50*time.Millisecond) // the breaker's stay
		ok := 0
		for range 3 {
			if d.call() == nil {
				ok++
			}
		}
		fmt.Printf("%s restarted: %d of 3 calls ok\n", d.name, ok)
	}
	stopHTTP()
	stopGRPC()

	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(line, "breaker") {
			fmt.Println(line)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		fmt.Println(err)
		return
	}
	transitions := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "callguard.breaker.transitions" {
				for _, p := range sum.DataPoints {
					client, _ := p.Attributes.Value("callguard.client")
					to, _ := p.Attributes.Value("callguard.to")
					transitions[client.AsString()+" to "+to.AsString()] += p.Value
				}
			}
		}
	}
	fmt.Println("transitions:", transitions)
	events := map[string]int{}
	for _, s := range rec.Ended() {
		for _, e := range s.Events() {
			events[s.Name()+" "+e.Name]++
		}
	}
	fmt.Println("events on the callers' spans:", events)
	// Output:
	// http healthy: <nil>
	// http stopped: the breaker opened after 3 calls; the next fails fast (true): true
	// http restarted: 3 of 3 calls ok
	// grpc healthy: <nil>
	// grpc stopped: the breaker opened after 3 calls; the next fails fast (true): true
	// grpc restarted: 3 of 3 calls ok
	// level=WARN msg="callguard: breaker open" client=catalog-http adapter=httpmw from=closed to=open
	// level=INFO msg="callguard: breaker half-open" client=catalog-http adapter=httpmw from=open to=half-open
	// level=INFO msg="callguard: breaker closed" client=catalog-http adapter=httpmw from=half-open to=closed
	// level=WARN msg="callguard: breaker open" client=catalog-grpc adapter=grpcmw from=closed to=open
	// level=INFO msg="callguard: breaker half-open" client=catalog-grpc adapter=grpcmw from=open to=half-open
	// level=INFO msg="callguard: breaker closed" client=catalog-grpc adapter=grpcmw from=half-open to=closed
	// transitions: map[catalog-grpc to closed:1 catalog-grpc to half-open:1 catalog-grpc to open:1 catalog-http to closed:1 catalog-http to half-open:1 catalog-http to open:1]
	// events on the callers' spans: map[GET / callguard.rejected:2 GET / callguard.retry:6 Health/Check callguard.rejected:2 Health/Check callguard.retry:6 callguard.attempt exception:20]
}

// serveHTTP serves a healthy downstream on addr ("": a free port), and
// returns its address and what stops it (nothing listens there after).
func serveHTTP(addr string) (string, func()) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		panic(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })}
	go func() { _ = srv.Serve(lis) }()
	return lis.Addr().String(), func() { _ = srv.Close() }
}

// serveGRPC serves a healthy gRPC health service on addr ("": a free
// port), and returns its address and what stops it.
func serveGRPC(addr string) (string, func()) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	return lis.Addr().String(), srv.Stop
}
