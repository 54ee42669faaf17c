#!/usr/bin/env bash
# Use before `bash bench/gpu_checks.sh gateway-ab`, which compares a revision's gateway with the
# working tree's on a machine without the repository's history (a lent GPU).
#
# Writes the code of revision REV to ab-base/ (ignored by git); gateway-ab then measures the
# gateway's CPU a request from it and from the working tree, taking turns (carry ab-base to the
# lent machine with .whl and .gpu).
#
#   bash tools/ab_base.sh REV
set -euo pipefail
rev=${1:?usage: bash tools/ab_base.sh REV}
rm -rf ab-base && mkdir ab-base
git archive "$rev" common gateway pdserve prefill_worker decode_worker wire client simulator bench | tar -x -C ab-base
rm -rf ab-base/bench/results
grep -qx '/ab-base/' .git/info/exclude 2>/dev/null || echo '/ab-base/' >> .git/info/exclude
echo "ab-base/ holds $(git rev-parse --short "$rev") ($(du -sh ab-base | cut -f1)); carry it with .whl and .gpu"
