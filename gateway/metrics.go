package gateway

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcp-warden/mcp-warden/policy"
)

// metrics are the gateway's Prometheus metrics, in a registry of its own so
// that several gateways in one process do not collide.
type metrics struct {
	registry  *prometheus.Registry
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	// tlsHandshakeFailures counts failed TLS handshakes by listener.
	tlsHandshakeFailures *prometheus.CounterVec
	// restarts counts upstream restarts by server (restart.go).
	restarts *prometheus.CounterVec
}

// decisionBuckets span a cached policy lookup (~10 µs) to a slow policy
// with an fsync per decision.
var decisionBuckets = []float64{10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1}

func newMetrics(g *Gateway) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_warden_decisions_total",
			Help: "Policy decisions by action (tools/list: one per tool) and result (allow, deny, error: denied for an error).",
		}, []string{"action", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mcp_warden_decision_duration_seconds",
			Help:    "Time to decide and log one request (a tools/list decides every tool at once).",
			Buckets: decisionBuckets,
		}, []string{"action"}),
		tlsHandshakeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_warden_tls_handshake_failures_total",
			Help: "TLS handshakes that failed on an HTTP listener (missing or untrusted client certificate, protocol errors), by listener address.",
		}, []string{"listener"}),
		restarts: newRestartsCounter(),
	}
	m.registry.MustRegister(m.decisions, m.latency, m.tlsHandshakeFailures, m.restarts, upstreamCollector{g}, uploadCollector{g.declog},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observe records the decisions of one request and how long they took.
func (m *metrics) observe(action policy.Action, start time.Time, decisions ...policy.Decision) {
	m.latency.WithLabelValues(string(action)).Observe(time.Since(start).Seconds())
	for _, d := range decisions {
		result := "deny"
		switch {
		case d.Err != nil:
			result = "error"
		case d.Allow:
			result = "allow"
		}
		m.decisions.WithLabelValues(string(action), result).Inc()
	}
}

// MetricsHandler serves the gateway's Prometheus metrics: decisions by
// action and result, decision latency, upstream health, decision-log upload
// counters, and Go runtime and process metrics. Run serves it at /metrics
// on the address configured as metrics.http.
func (g *Gateway) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(g.metrics.registry, promhttp.HandlerOpts{})
}

var (
	upstreamUpDesc = prometheus.NewDesc("mcp_warden_upstream_up",
		"1 while the upstream server is running and connected, 0 when it did not start or has exited.", []string{"server"}, nil)
	upstreamToolsDesc = prometheus.NewDesc("mcp_warden_upstream_tools",
		"Tools the upstream server declared at start.", []string{"server"}, nil)
	upstreamInstancesDesc = prometheus.NewDesc("mcp_warden_upstream_instances",
		"Per-principal instances of the upstream server running or starting (servers with instances.per: principal only).", []string{"server"}, nil)
)

// upstreamCollector reports each configured server's health when scraped.
type upstreamCollector struct{ g *Gateway }

func (c upstreamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- upstreamUpDesc
	ch <- upstreamToolsDesc
	ch <- upstreamInstancesDesc
}

func (c upstreamCollector) Collect(ch chan<- prometheus.Metric) {
	c.g.mu.RLock()
	running := map[string]bool{}
	instances := map[string]*principalInstances{}
	for _, u := range c.g.upstreams {
		running[u.cfg.Name] = !c.g.closed && u.alive()
		instances[u.cfg.Name] = u.instances
	}
	status := c.g.status
	c.g.mu.RUnlock()
	for _, sc := range c.g.cfg.Servers {
		if sc.Instances.perPrincipal() {
			n := 0
			if s := instances[sc.Name]; s != nil {
				n = s.count()
			}
			ch <- prometheus.MustNewConstMetric(upstreamInstancesDesc, prometheus.GaugeValue, float64(n), sc.Name)
		}
	}
	for _, sc := range c.g.cfg.Servers {
		up := 0.0
		if running[sc.Name] {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(upstreamUpDesc, prometheus.GaugeValue, up, sc.Name)
	}
	for _, st := range status {
		ch <- prometheus.MustNewConstMetric(upstreamToolsDesc, prometheus.GaugeValue, float64(st.Tools), st.Name)
	}
}

var (
	uploadShippedDesc = prometheus.NewDesc("mcp_warden_decision_log_upload_shipped_total",
		"Decision-log records accepted by the upload service.", nil, nil)
	uploadDroppedDesc = prometheus.NewDesc("mcp_warden_decision_log_upload_dropped_total",
		"Decision-log records never uploaded: the upload buffer was full, or they were waiting at shutdown.", nil, nil)
	uploadFailuresDesc = prometheus.NewDesc("mcp_warden_decision_log_upload_failures_total",
		"Failed decision-log upload attempts (each is retried).", nil, nil)
)

// uploadCollector reports the decision-log upload's counters.
type uploadCollector struct{ log *policy.DecisionLog }

func (c uploadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- uploadShippedDesc
	ch <- uploadDroppedDesc
	ch <- uploadFailuresDesc
}

func (c uploadCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.log.UploadStats()
	ch <- prometheus.MustNewConstMetric(uploadShippedDesc, prometheus.CounterValue, float64(st.Shipped))
	ch <- prometheus.MustNewConstMetric(uploadDroppedDesc, prometheus.CounterValue, float64(st.Dropped))
	ch <- prometheus.MustNewConstMetric(uploadFailuresDesc, prometheus.CounterValue, float64(st.Failures))
}
