-- The fenced job lease of source document 000 (a MySQL service), on MariaDB: an owner token AND
-- a fence token per lease, judged by database time; and the runs whose completion is fenced by
-- a join on the lease in the same statement.
CREATE TABLE fenced_job_leases (
  lease_name    VARCHAR(128) PRIMARY KEY,
  owner_token   VARCHAR(64)  NOT NULL,
  fence_token   BIGINT       NOT NULL,
  leased_until  DATETIME(3)  NOT NULL
) ENGINE = InnoDB;

CREATE TABLE reconciliation_runs (
  run_id       VARCHAR(64)  PRIMARY KEY,
  lease_name   VARCHAR(128) NOT NULL,
  owner_token  VARCHAR(64)  NOT NULL,
  fence_token  BIGINT       NOT NULL,
  status       VARCHAR(16)  NOT NULL,
  finished_at  DATETIME(3)  NULL
) ENGINE = InnoDB;
