package auditlog

import (
	"encoding/json"
	"testing"
)

var sampleEvent = []byte(`{"prev_hash":"0000000000000000000000000000000000000000000000000000000000000000","labels":{"id":"vm/2407","type":"mcp-warden","version":"0.1.0-dev"},"decision_id":"c48b19fe-0fee-4700-b62f-d8eae5d9cf44","bundles":{"mcp-warden":{"revision":"be86e65e46b887d5a425f46c874edb52cb4d7338a3b7242e9e0b2afcc2b8d720"}},"path":"mcp/warden/decision","input":{"action":"tools/call","principal":{"id":"alice","transport":"api","auth_method":"none"},"server":{"name":"demo","command":"/work/wt-audit/.cache/bin/cmd_mcp-warden/mcp-warden","args":["demo-server"],"confinement":{"process_group":true,"pid_namespace":true,"parent_death_signal":true,"environment_inherited":false}},"tool":{"name":"demo__echo","upstream_name":"echo","description":"Returns the message it is given.","input_schema":{"additionalProperties":false,"properties":{"message":{"description":"the text to send back","type":"string"}},"required":["message"],"type":"object"},"annotations":{"idempotentHint":false,"openWorldHint":false,"readOnlyHint":true},"sha256":"cf6097c01aafb10389a3fbd6f758756f3d20993a72c5eba3b45cf8954ae8e1e1"},"time":"2026-11-22T02:48:03.093962263Z"},"result":{"allow":true,"reason":"tool exposed by data.warden.servers and not denied"},"req_id":1,"timestamp":"2026-11-22T02:48:03.094675252Z","metrics":{"timer_mcp_warden_decision_ns":697861,"timer_rego_query_eval_ns":697671},"erased":["/input/arguments"]}`)

func BenchmarkCanonicalRecord(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 4096)
	for range b.N {
		if _, err := canonicalRecord(buf[:0], sampleEvent); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReferenceJSONValid(b *testing.B) {
	for range b.N {
		if !json.Valid(sampleEvent) {
			b.Fatal("invalid")
		}
	}
}
