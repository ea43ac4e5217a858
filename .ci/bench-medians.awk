# Reads `go test -bench BenchmarkToolsCallDecision -count N` output and
# prints each variant's median ns/op and the speed-up of ours over the two
# OPA baselines measured in the same run.
/^BenchmarkToolsCallDecision\// {
	name = $1
	sub(/^BenchmarkToolsCallDecision\//, "", name)
	sub(/-[0-9]+$/, "", name)
	n[name]++
	v[name, n[name]] = $3 + 0
}
function median(name,    i, j, k, t, a) {
	k = n[name]
	for (i = 1; i <= k; i++) a[i] = v[name, i]
	for (i = 2; i <= k; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
	if (k % 2) return a[(k + 1) / 2]
	return (a[k / 2] + a[k / 2 + 1]) / 2
}
END {
	if (!n["ours"] || !n["opa_wasm"] || !n["opa_topdown"]) { print "bench: missing results"; exit 1 }
	ours = median("ours"); ow = median("opa_wasm"); td = median("opa_topdown")
	printf "tools/call decision, median of %d runs (ns/op):\n", n["ours"]
	printf "  (a) mcp-warden wasm host  %10.0f\n", ours
	printf "  (b) OPA rego.Target(wasm) %10.0f\n", ow
	printf "  (c) OPA topdown prepared  %10.0f\n", td
	printf "(a) is %.2fx faster than (b) and %.2fx faster than (c)\n", ow / ours, td / ours
}
