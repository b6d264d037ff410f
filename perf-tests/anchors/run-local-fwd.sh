#!/bin/bash
# local-fwd against the reference systems, all in one session with one generator:
# the shared anchors' direct veth, Linux bridge, DPDK testpmd (AF_XDP) and OVS userspace
# (AF_XDP ports), then xwire as the DUT (xwire-dut.sh). Prints the anchors' summary lines
# and xwire's ratios to each. Installs the anchors' packages first (root).
#   perf-tests/anchors/run-local-fwd.sh          (DUR, REPS, SIZES as in the anchors)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ANCHORS=${ANCHORS:-$(cd "$HERE/../../../shared/anchors" && pwd)}
export ANCHORS DUR=${DUR:-5} REPS=${REPS:-3} SIZES=${SIZES:-"64 1514"}
export RESULTS=${RESULTS:-/tmp/xwire-local-fwd}
rm -rf "$RESULTS"; mkdir -p "$RESULTS"
bash "$ANCHORS/00-install.sh" >/dev/null
cd "$HERE/../.." && cargo build --release -q -p xwire-perf --bin xwire-perf || exit 1
export XWIRE_PERF=$PWD/target/release/xwire-perf
VARIANTS=norps bash "$ANCHORS/01-direct.sh" >/dev/null
VARIANTS=rps bash "$ANCHORS/02-bridge.sh" >/dev/null
MODES=af_xdp bash "$ANCHORS/03-testpmd.sh" >/dev/null
bash "$ANCHORS/04-ovs-netdev.sh" >/dev/null
bash "$HERE/xwire-dut.sh" >/dev/null
cat "$RESULTS/summary.txt"
# Ratios of xwire's median delivered rate to each reference, per frame size.
awk '$2 ~ /B$/ { name=$1; size=$2; for (i=1;i<=NF;i++) if ($i=="delivered" && $(i+1)=="Mpps") { split($(i+2), m, "/"); med[name" "size]=m[2] } ; names[name]=1; sizes[size]=1 }
  END { for (s in sizes) { x=med["xwire "s]; if (x=="") continue;
          for (n in names) if (n!="xwire" && med[n" "s]>0) printf "ratio %-6s xwire / %-28s %.2f\n", s, n, x/med[n" "s] } }' "$RESULTS/summary.txt" | sort
