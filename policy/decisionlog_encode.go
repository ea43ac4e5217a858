package policy

import (
	"slices"
	"strconv"
	"sync"

	"github.com/mcp-warden/mcp-warden/policy/internal/auditlog"
)

// The decision log writes its events straight into their canonical record
// form, field by field in sorted key order, with the same output as
// encoding/json followed by canonicalization (TestEventEncoderEqualsMarshal
// checks that over generated events with every field set). Only dynamic
// values (claims, schemas, arguments, result extras) go through
// auditlog.AppendCanonical; parts that are the same in every event
// (labels, bundles) are encoded once per log, and tools and servers equal
// to ones already written are not encoded again (decisionlog_memo.go).

// eventEncoder holds the encoded constant parts of a log's events.
type eventEncoder struct {
	labels      map[string]string
	labelsJSON  []byte
	bundles     map[string]BundleRevision
	bundlesJSON []byte
	memo        definitionMemo
}

func newEventEncoder(labels map[string]string, bundles map[string]BundleRevision) *eventEncoder {
	x := &eventEncoder{labels: labels, bundles: bundles}
	x.labelsJSON, _ = auditlog.AppendCanonical(nil, labels)
	x.bundlesJSON, _ = auditlog.AppendCanonical(nil, bundles)
	return x
}

// encodeBuffers are reused for events, so a decision allocates no record.
var encodeBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledBuffer keeps the buffers of huge list events out of the pool.
const maxPooledBuffer = 256 << 10

// encode appends ev's canonical record, with a placeholder prev_hash, to b.
func (x *eventEncoder) encode(b []byte, ev *Event) (auditlog.Encoded, error) {
	var err error
	b = append(b, '{')
	if len(ev.Bundles) > 0 {
		b = append(b, `"bundles":`...)
		if sameMap(ev.Bundles, x.bundles) {
			b = append(b, x.bundlesJSON...)
		} else if b, err = auditlog.AppendCanonical(b, ev.Bundles); err != nil {
			return auditlog.Encoded{}, err
		}
		b = append(b, ',')
	}
	if len(ev.Custom) > 0 {
		b = append(b, `"custom":`...)
		if b, err = auditlog.AppendCanonical(b, ev.Custom); err != nil {
			return auditlog.Encoded{}, err
		}
		b = append(b, ',')
	}
	b = append(b, `"decision_id":`...)
	b = auditlog.AppendString(b, ev.DecisionID)
	if len(ev.Erased) > 0 {
		b = appendStrings(append(b, `,"erased":`...), ev.Erased)
	}
	if ev.Error != nil {
		b = append(b, `,"error":{"code":`...)
		b = auditlog.AppendString(b, ev.Error.Code)
		b = append(b, `,"message":`...)
		b = append(auditlog.AppendString(b, ev.Error.Message), '}')
	}
	if b, err = x.value(append(b, `,"input":`...), ev.Input); err != nil {
		return auditlog.Encoded{}, err
	}
	b = append(b, `,"labels":`...)
	if sameMap(ev.Labels, x.labels) && x.labelsJSON != nil {
		b = append(b, x.labelsJSON...)
	} else if b, err = auditlog.AppendCanonical(b, ev.Labels); err != nil {
		return auditlog.Encoded{}, err
	}
	if len(ev.Masked) > 0 {
		b = appendStrings(append(b, `,"masked":`...), ev.Masked)
	}
	if b, err = appendMetrics(append(b, `,"metrics":`...), ev.Metrics); err != nil {
		return auditlog.Encoded{}, err
	}
	if ev.NDBuiltinCache != nil {
		if b, err = auditlog.AppendCanonical(append(b, `,"nd_builtin_cache":`...), ev.NDBuiltinCache); err != nil {
			return auditlog.Encoded{}, err
		}
	}
	b = append(b, `,"path":`...)
	b = append(auditlog.AppendString(b, ev.Path), ',')
	b, prevAt := auditlog.AppendPrevHash(b)
	b = strconv.AppendUint(append(b, `,"req_id":`...), ev.RequestID, 10)
	if ev.Result != nil {
		if b, err = x.value(append(b, `,"result":`...), ev.Result); err != nil {
			return auditlog.Encoded{}, err
		}
	}
	b = append(b, `,"timestamp":`...)
	b = append(auditlog.AppendString(b, ev.Timestamp), '}')
	return auditlog.Encoded{Canonical: b, PrevAt: prevAt}, nil
}

// value encodes an event's input or result: the gateway's own types by
// hand, anything else (a masked document) generically.
func (x *eventEncoder) value(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case Input:
		return x.appendInput(b, &v)
	case *Input:
		if v == nil {
			return append(b, "null"...), nil
		}
		return x.appendInput(b, v)
	case listInput:
		return x.appendListInput(b, &v)
	case []listResult:
		if v == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendListResult(b, &v[i]); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case decisionResult:
		return appendDecisionResult(b, &v)
	case *decisionResult:
		if v == nil {
			return append(b, "null"...), nil
		}
		return appendDecisionResult(b, v)
	case listRepeat:
		b = append(b, `{"same_as":{"decision_id":`...)
		b = auditlog.AppendString(b, v.SameAs.DecisionID)
		b = append(b, `,"hash":`...)
		return append(auditlog.AppendString(b, v.SameAs.Hash), '}', '}'), nil
	}
	return auditlog.AppendCanonical(b, v)
}

func appendDecisionResult(b []byte, v *decisionResult) ([]byte, error) {
	if len(v.Extra) > 0 {
		return auditlog.AppendCanonical(b, Decision(*v).Result())
	}
	b = appendBool(append(b, `{"allow":`...), v.Allow)
	if v.Hidden {
		b = append(b, `,"hidden":true`...)
	}
	if v.Reason != "" {
		b = auditlog.AppendString(append(b, `,"reason":`...), v.Reason)
	}
	return append(b, '}'), nil
}

// appendMetrics writes the metrics of a decision's event (the two timers,
// in sorted order) without sorting a map; others generically.
func appendMetrics(b []byte, m map[string]int64) ([]byte, error) {
	if len(m) == 2 {
		took, ok1 := m[timerDecision]
		eval, ok2 := m[timerEval]
		if ok1 && ok2 {
			b = strconv.AppendInt(append(b, `{"`+timerDecision+`":`...), took, 10)
			b = strconv.AppendInt(append(b, `,"`+timerEval+`":`...), eval, 10)
			return append(b, '}'), nil
		}
	}
	return auditlog.AppendCanonical(b, m)
}

func appendStrings(b []byte, s []string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, e := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = auditlog.AppendString(b, e)
	}
	return append(b, ']')
}

func appendBool(b []byte, v bool) []byte { return strconv.AppendBool(b, v) }

// appendInput writes an Input's members in sorted order: action,
// arguments, principal, prompt, request_id, resource, server, session_id,
// time, tool.
func (x *eventEncoder) appendInput(b []byte, in *Input) ([]byte, error) {
	var err error
	b = append(b, `{"action":`...)
	b = auditlog.AppendString(b, string(in.Action))
	if len(in.Arguments) > 0 {
		if b, err = auditlog.AppendCanonical(append(b, `,"arguments":`...), in.Arguments); err != nil {
			return nil, err
		}
	}
	if b, err = appendPrincipal(append(b, `,"principal":`...), &in.Principal); err != nil {
		return nil, err
	}
	if in.Prompt != nil {
		b = appendPrompt(append(b, `,"prompt":`...), in.Prompt)
	}
	if in.RequestID != "" {
		b = auditlog.AppendString(append(b, `,"request_id":`...), in.RequestID)
	}
	if in.Resource != nil {
		b = appendResource(append(b, `,"resource":`...), in.Resource)
	}
	b = x.memo.appendServer(append(b, `,"server":`...), &in.Server)
	if in.SessionID != "" {
		b = auditlog.AppendString(append(b, `,"session_id":`...), in.SessionID)
	}
	b = auditlog.AppendString(append(b, `,"time":`...), in.Time)
	if in.Tool != nil {
		if b, err = x.memo.appendTool(append(b, `,"tool":`...), in.Tool); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

func appendPrincipal(b []byte, p *Principal) ([]byte, error) {
	var err error
	b = auditlog.AppendString(append(b, `{"auth_method":`...), p.AuthMethod)
	if len(p.Claims) > 0 {
		if b, err = auditlog.AppendCanonical(append(b, `,"claims":`...), p.Claims); err != nil {
			return nil, err
		}
	}
	b = auditlog.AppendString(append(b, `,"id":`...), p.ID)
	b = auditlog.AppendString(append(b, `,"transport":`...), p.Transport)
	return append(b, '}'), nil
}

func appendServer(b []byte, s *Server) []byte {
	b = append(b, '{')
	if len(s.Args) > 0 {
		b = append(appendStrings(append(b, `"args":`...), s.Args), ',')
	}
	if s.Command != "" {
		b = append(auditlog.AppendString(append(b, `"command":`...), s.Command), ',')
	}
	b = appendConfinement(append(b, `"confinement":`...), &s.Confinement)
	b = auditlog.AppendString(append(b, `,"name":`...), s.Name)
	if s.URL != "" {
		b = auditlog.AppendString(append(b, `,"url":`...), s.URL)
	}
	return append(b, '}')
}

func appendConfinement(b []byte, c *Confinement) []byte {
	b = appendBool(append(b, `{"capabilities_dropped":`...), c.CapabilitiesDropped)
	b = auditlog.AppendString(append(b, `,"cgroup":`...), c.Cgroup)
	b = appendBool(append(b, `,"environment_inherited":`...), c.EnvironmentInherited)
	b = appendBool(append(b, `,"ipc_namespace":`...), c.IPCNamespace)
	b = strconv.AppendInt(append(b, `,"landlock":`...), int64(c.Landlock), 10)
	b = auditlog.AppendString(append(b, `,"level":`...), c.Level)
	if len(c.Missing) > 0 {
		b = appendStrings(append(b, `,"missing":`...), c.Missing)
	}
	b = appendBool(append(b, `,"mount_namespace":`...), c.MountNamespace)
	b = auditlog.AppendString(append(b, `,"network":`...), c.Network)
	b = appendBool(append(b, `,"network_namespace":`...), c.NetworkNamespace)
	b = appendBool(append(b, `,"no_new_privs":`...), c.NoNewPrivs)
	b = appendBool(append(b, `,"parent_death_signal":`...), c.ParentDeathSignal)
	b = appendBool(append(b, `,"pid_namespace":`...), c.PIDNamespace)
	b = appendBool(append(b, `,"process_group":`...), c.ProcessGroup)
	b = appendBool(append(b, `,"seccomp":`...), c.Seccomp)
	b = appendBool(append(b, `,"user_namespace":`...), c.UserNamespace)
	b = appendBool(append(b, `,"uts_namespace":`...), c.UTSNamespace)
	return append(b, '}')
}

func appendTool(b []byte, t *Tool) ([]byte, error) {
	var err error
	b = append(b, '{')
	if t.Annotations != nil {
		if b, err = auditlog.AppendCanonical(append(b, `"annotations":`...), t.Annotations); err != nil {
			return nil, err
		}
		b = append(b, ',')
	}
	if t.Description != "" {
		b = append(auditlog.AppendString(append(b, `"description":`...), t.Description), ',')
	}
	if t.InputSchema != nil {
		if b, err = auditlog.AppendCanonical(append(b, `"input_schema":`...), t.InputSchema); err != nil {
			return nil, err
		}
		b = append(b, ',')
	}
	b = auditlog.AppendString(append(b, `"name":`...), t.Name)
	b = auditlog.AppendString(append(b, `,"sha256":`...), t.SHA256)
	b = auditlog.AppendString(append(b, `,"upstream_name":`...), t.UpstreamName)
	return append(b, '}'), nil
}

func appendResource(b []byte, r *Resource) []byte {
	b = append(b, '{')
	if r.MIMEType != "" {
		b = append(auditlog.AppendString(append(b, `"mime_type":`...), r.MIMEType), ',')
	}
	if r.Name != "" {
		b = append(auditlog.AppendString(append(b, `"name":`...), r.Name), ',')
	}
	if r.Template {
		b = append(b, `"template":true,`...)
	}
	b = auditlog.AppendString(append(b, `"uri":`...), r.URI)
	return append(b, '}')
}

func appendPrompt(b []byte, p *Prompt) []byte {
	b = append(b, '{')
	if p.Description != "" {
		b = append(auditlog.AppendString(append(b, `"description":`...), p.Description), ',')
	}
	b = auditlog.AppendString(append(b, `"name":`...), p.Name)
	b = auditlog.AppendString(append(b, `,"upstream_name":`...), p.UpstreamName)
	return append(b, '}')
}

// appendListInput writes action, principal, prompts, request_id,
// resources, session_id, time, tools.
func (x *eventEncoder) appendListInput(b []byte, li *listInput) ([]byte, error) {
	var err error
	b = auditlog.AppendString(append(b, `{"action":`...), string(li.Action))
	if b, err = appendPrincipal(append(b, `,"principal":`...), &li.Principal); err != nil {
		return nil, err
	}
	if len(li.Prompts) > 0 {
		if b, err = x.appendListedItems(append(b, `,"prompts":`...), li.Prompts); err != nil {
			return nil, err
		}
	}
	if li.RequestID != "" {
		b = auditlog.AppendString(append(b, `,"request_id":`...), li.RequestID)
	}
	if len(li.Resources) > 0 {
		if b, err = x.appendListedItems(append(b, `,"resources":`...), li.Resources); err != nil {
			return nil, err
		}
	}
	if li.SessionID != "" {
		b = auditlog.AppendString(append(b, `,"session_id":`...), li.SessionID)
	}
	b = auditlog.AppendString(append(b, `,"time":`...), li.Time)
	if len(li.Tools) > 0 {
		if b, err = x.appendListedItems(append(b, `,"tools":`...), li.Tools); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendListedItems writes items as [{prompt, resource, server, tool}, …].
// Once the first item is written, b grows for all of them at once.
func (x *eventEncoder) appendListedItems(b []byte, items listedInputs) ([]byte, error) {
	var err error
	b = append(b, '[')
	start := len(b)
	for i := range items {
		it := &items[i]
		if i > 0 {
			b = append(b, ',')
		}
		if i == 1 {
			b = slices.Grow(b, (len(b)-start)*(len(items)-1)*5/4)
		}
		b = append(b, '{')
		if it.Prompt != nil {
			b = append(appendPrompt(append(b, `"prompt":`...), it.Prompt), ',')
		}
		if it.Resource != nil {
			b = append(appendResource(append(b, `"resource":`...), it.Resource), ',')
		}
		b = x.memo.appendServer(append(b, `"server":`...), &it.Server)
		if it.Tool != nil {
			if b, err = x.memo.appendTool(append(b, `,"tool":`...), it.Tool); err != nil {
				return nil, err
			}
		}
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

// appendListResult writes allow, error, hidden, nd_builtin_cache, prompt,
// reason, resource, tool.
func appendListResult(b []byte, r *listResult) ([]byte, error) {
	b = appendBool(append(b, `{"allow":`...), r.Allow)
	if r.Error != "" {
		b = auditlog.AppendString(append(b, `,"error":`...), r.Error)
	}
	if r.Hidden {
		b = append(b, `,"hidden":true`...)
	}
	if r.NDBuiltinCache != nil {
		var err error
		if b, err = auditlog.AppendCanonical(append(b, `,"nd_builtin_cache":`...), r.NDBuiltinCache); err != nil {
			return nil, err
		}
	}
	if r.Prompt != "" {
		b = auditlog.AppendString(append(b, `,"prompt":`...), r.Prompt)
	}
	if r.Reason != "" {
		b = auditlog.AppendString(append(b, `,"reason":`...), r.Reason)
	}
	if r.Resource != "" {
		b = auditlog.AppendString(append(b, `,"resource":`...), r.Resource)
	}
	if r.Tool != "" {
		b = auditlog.AppendString(append(b, `,"tool":`...), r.Tool)
	}
	return append(b, '}'), nil
}
