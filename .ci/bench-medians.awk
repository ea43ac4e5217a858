# Reads `go test -bench BenchmarkToolsCallDecision -count N` output (the
# benchmarks BenchmarkToolsCallDecision and
# BenchmarkToolsCallDecisionFromInput) and prints, for each, every
# variant's median ns/op and the speed-up of ours over the two OPA
# baselines measured in the same run.
/^BenchmarkToolsCallDecision[A-Za-z]*\// {
	split($1, part, "/")
	bench = part[1]
	name = part[2]
	sub(/-[0-9]+$/, "", name)
	if (!(bench in seen)) { seen[bench] = 1; order[++nb] = bench }
	n[bench, name]++
	v[bench, name, n[bench, name]] = $3 + 0
}
function median(bench, name,    i, j, k, t, a) {
	k = n[bench, name]
	for (i = 1; i <= k; i++) a[i] = v[bench, name, i]
	for (i = 2; i <= k; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
	if (k % 2) return a[(k + 1) / 2]
	return (a[k / 2] + a[k / 2 + 1]) / 2
}
END {
	if (!nb) { print "bench: missing results"; exit 1 }
	for (i = 1; i <= nb; i++) {
		b = order[i]
		if (!n[b, "ours"] || !n[b, "opa_wasm"] || !n[b, "opa_topdown"]) { print "bench: missing results of " b; exit 1 }
		ours = median(b, "ours"); ow = median(b, "opa_wasm"); td = median(b, "opa_topdown")
		if (b == "BenchmarkToolsCallDecision") printf "tools/call decision from the whole input's JSON bytes, median of %d runs (ns/op):\n", n[b, "ours"]
		else printf "tools/call decision from the Input (ours reduced to what the policy reads), median of %d runs (ns/op):\n", n[b, "ours"]
		printf "  (a) mcp-warden wasm host  %10.0f\n", ours
		printf "  (b) OPA rego.Target(wasm) %10.0f\n", ow
		printf "  (c) OPA topdown prepared  %10.0f\n", td
		if (n[b, "rego_pruned"]) printf "      mcp-warden rego engine %10.0f (reduced input)\n", median(b, "rego_pruned")
		printf "(a) is %.2fx faster than (b) and %.2fx faster than (c)\n", ow / ours, td / ours
	}
}
