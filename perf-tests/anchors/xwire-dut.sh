#!/bin/bash
# xwire measured the way ../shared/anchors measures its reference systems: the same
# gen -- DUT -- sink topology, the same generator (DPDK testpmd txonly on CPU 0 by
# default), the same counters and summary lines, with `xwire-perf dut` as the DUT on CPU 1.
# Run it beside the anchor scripts so that every figure comes from one session:
#   XWIRE_PERF=target/release/xwire-perf perf-tests/anchors/xwire-dut.sh
#   (knobs as in the anchors: DUR, REPS, SIZES, GEN, ...; XWIRE_ARGS adds dut options)
ANCHORS=${ANCHORS:-$(cd "$(dirname "$0")/../../../shared/anchors" && pwd)}
source "$ANCHORS/common.sh"
XWIRE_PERF=$(realpath "${XWIRE_PERF:?set XWIRE_PERF to the xwire-perf binary}")
log "versions: $(versions)"
topo_gen_dut_sink
ip netns exec "$NS_DUT" nice -n "$NICE" "$XWIRE_PERF" dut --ports dut0,dut1 --core "$DUT_CPU" \
  --busy-poll --seconds "$(matrix_secs)" ${XWIRE_ARGS:-} >"$RESULTS/xwire-dut.log" 2>&1 &
DUT_PID=$!; ANC_PIDS+=("$DUT_PID")
sleep 2
if ! kill -0 "$DUT_PID" 2>/dev/null; then
  log "xwire dut FAILED to start:"; tail -15 "$RESULTS/xwire-dut.log" >&2
  exit 1
fi
run_matrix "xwire${XWIRE_NAME:+-$XWIRE_NAME}" x x x x "$DUT_PID"
kill -INT "$DUT_PID"; wait "$DUT_PID" 2>/dev/null
