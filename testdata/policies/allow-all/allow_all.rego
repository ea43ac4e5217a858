# A policy that allows everything, for the conformance runs through the
# gateway: they measure protocol fidelity, not policy.
package mcp.warden

decision := {"allow": true, "reason": "allow-all test policy"}
