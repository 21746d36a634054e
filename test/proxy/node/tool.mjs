// toolOutput is the result of the agents' tool on turn i (loop.mjs, aisdk.mjs): test/proxy's
// toolOutput, the same bytes (one or two KB of test log, every fifth large enough to be
// offloaded).
export function toolOutput(dir, i) {
  let out = `$ pytest -k case${i}\n`;
  let lines = 30 + (i % 3) * 20;
  if (i % 5 === 0) {
    lines = 160;
  }
  for (let j = 0; j < lines; j++) {
    out += `${dir}/test_case${i}.py::test_${j} PASSED [${Math.floor((100 * j) / lines)}%]\n`;
  }
  out += `==== ${lines - 1} passed, 1 failed: ${dir}/test_edge.py::test_edge${i} AssertionError: expected 4, got 5 ====\n`;
  return out;
}
