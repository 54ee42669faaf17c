#!/usr/bin/env bash
# Writes the code of a revision to ab-base/ (ignored by git) for `bash bench/gpu_checks.sh
# gateway-ab`, which runs the gateway's CPU a request from it and from the working tree, taking
# turns, on a machine without the repository's history (a lent GPU: carry ab-base with .whl and .gpu).
#
#   bash bench/ab_base.sh REV
set -euo pipefail
rev=${1:?usage: bash bench/ab_base.sh REV}
rm -rf ab-base && mkdir ab-base
git archive "$rev" common gateway pdserve prefill_worker decode_worker wire client simulator bench | tar -x -C ab-base
rm -rf ab-base/bench/results
grep -qx '/ab-base/' .git/info/exclude 2>/dev/null || echo '/ab-base/' >> .git/info/exclude
echo "ab-base/ holds $(git rev-parse --short "$rev") ($(du -sh ab-base | cut -f1)); carry it with .whl and .gpu"
