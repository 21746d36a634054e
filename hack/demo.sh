#!/usr/bin/env bash
# make demo: replays a sample coding-agent transcript through the compactor turn by turn,
# as an agent would call it before every LLM call, with a context window small enough that
# every tier shows up. Prints each compaction notification and a summary, reads an offloaded
# tool result back, shows the last JSONL record, and plots usage per turn.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
ctl="$root/bin/compactctl"
out="$root/demo-out"
transcript=${DEMO_TRANSCRIPT:-$root/testdata/long-session.jsonl}
window=${DEMO_WINDOW:-8000}

[[ -x "$ctl" ]] || { echo "demo: $ctl is missing: run 'make build'" >&2; exit 1; }
[[ -r "$transcript" ]] || { echo "demo: cannot read $transcript" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"

echo "== Replaying $(basename "$transcript") with a ${window}-token window"
echo
"$ctl" simulate --context-window "$window" --session-id demo --store "$out" --plot "$out/usage.svg" "$transcript"

echo
echo "== An offloaded tool result, read back from the store"
first=$(find "$out/.harness9/tool_results/demo" -name '*.txt' -print 2>/dev/null | sort | head -n 1)
if [[ -n "$first" ]]; then
	echo "$first ($(wc -c <"$first") bytes), first lines:"
	head -n 5 "$first" | cut -c1-120
else
	echo "(no tool result was large enough to offload)"
fi

records="$out/.harness9/compaction_records/demo.jsonl"
echo
echo "== The audit trail: $(wc -l <"$records") JSONL records in $records; the last one, abridged:"
tail -n 1 "$records" | cut -c1-600
echo
echo
echo "== Plot of context usage per turn: $out/usage.svg"
