-- The job's own store (PostgreSQL): its effect (the reports) and its
-- completion record (job_runs) are written in one transaction, guarded by
-- the fencing token (job_fence). README.md explains why.
CREATE TABLE job_fence (
  job   text PRIMARY KEY,
  token bigint NOT NULL -- the highest CONSUL_LOCK_FENCING_TOKEN that wrote
);
INSERT INTO job_fence VALUES ('nightly-report', 0);

CREATE TABLE job_runs (
  job           text NOT NULL,
  run_id        text NOT NULL, -- CONSUL_LOCK_RUN_ID
  attempt       int NOT NULL,  -- CONSUL_LOCK_ATTEMPT
  fencing_token bigint NOT NULL,
  finished      timestamptz NOT NULL,
  PRIMARY KEY (job, run_id)
);

CREATE TABLE reports (
  run_id text PRIMARY KEY,
  body   text NOT NULL
);

-- record_nightly_report does the run's work and records it, all or nothing:
-- 'fenced' when a holder with a newer token has written (this one lost the
-- lock), 'done' when the run was already completed (by an attempt whose
-- runner died before the ledger recorded it), 'ran' otherwise.
CREATE FUNCTION record_nightly_report(p_run_id text, p_attempt int, p_token bigint) RETURNS text AS $$
BEGIN
  UPDATE job_fence SET token = p_token WHERE job = 'nightly-report' AND token <= p_token;
  IF NOT FOUND THEN
    RETURN 'fenced';
  END IF;
  INSERT INTO job_runs VALUES ('nightly-report', p_run_id, p_attempt, p_token, now())
    ON CONFLICT (job, run_id) DO NOTHING;
  IF NOT FOUND THEN
    RETURN 'done';
  END IF;
  -- The effect, in the same transaction as its record.
  INSERT INTO reports SELECT p_run_id, 'report for ' || p_run_id;
  RETURN 'ran';
END
$$ LANGUAGE plpgsql;
