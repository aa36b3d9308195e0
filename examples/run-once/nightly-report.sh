#!/bin/sh
# The nightly report as a run-once job: run it with
#   consullock run -lock nightly-report -- ./nightly-report.sh
# on every worker. The run ledger makes one attempt run per run ID; this
# script makes the work itself happen once per run ID even when an attempt
# succeeded and its runner died before the ledger recorded it (the next
# attempt then finds the run done here and exits 0).
set -eu
: "${CONSUL_LOCK_RUN_ID:?run me under consullock run on a lock with run_once}"
: "${CONSUL_LOCK_ATTEMPT:?}" "${CONSUL_LOCK_FENCING_TOKEN:?}"

# Run IDs are letters, digits and . _ : @ + - only: safe inside quotes.
result=$(psql -X -Atq -v ON_ERROR_STOP=1 -c \
  "SELECT record_nightly_report('$CONSUL_LOCK_RUN_ID', $CONSUL_LOCK_ATTEMPT, $CONSUL_LOCK_FENCING_TOKEN)")

case "$result" in
ran)
  echo "nightly-report: run $CONSUL_LOCK_RUN_ID done (attempt $CONSUL_LOCK_ATTEMPT, token $CONSUL_LOCK_FENCING_TOKEN)"
  ;;
done)
  echo "nightly-report: run $CONSUL_LOCK_RUN_ID was already done by an earlier attempt; nothing to do"
  ;;
fenced)
  echo "nightly-report: a holder with a newer fencing token has written; this one lost the lock" >&2
  exit 1
  ;;
*)
  echo "nightly-report: unexpected answer: $result" >&2
  exit 1
  ;;
esac
