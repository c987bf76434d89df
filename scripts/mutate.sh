#!/usr/bin/env bash
# Mutation testing (issue 35): plants each bug of scripts/mutants.json in a
# copy of this tree, rebuilds incrementally, runs the ctest entries that
# should catch it and writes docs/mutation-report.md. Runs outside CI's time
# budget: about 40 minutes on a 2-core machine. `scripts/mutate.sh --help`.
# The work is in scripts/mutate.py (standard-library Python): exact-text
# anchors with quotes and backslashes, per-mutant time limits and a JSON
# list are simpler and safer there than in shell.
set -euo pipefail
exec python3 "$(dirname "$0")/mutate.py" "$@"
