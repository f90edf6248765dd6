-- The lab's tables of the protected resource and the publish stand-in (F9's side effect), in
-- database res26. The fence's own state (seed004's fence_floor) is the system under test's: its
-- profile's resource.schema creates it beside these (fencing/profiles/).

CREATE TABLE report_part (
  scope       text,
  part        text,
  content     text NOT NULL,
  writer      text NOT NULL,
  token       bigint NOT NULL,
  written_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (scope, part)
);

-- Every attempt, accepted or rejected. Written after the write's own transaction ended, so a
-- rejected attempt's record survives the rollback of its write.
CREATE TABLE write_attempt (
  id        bigserial PRIMARY KEY,
  scope     text NOT NULL,
  part      text NOT NULL,
  writer    text NOT NULL,
  token     bigint NOT NULL,
  mode      text NOT NULL,
  accepted  boolean NOT NULL,
  at        timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- A downstream system that cannot take a fencing token (F9). `source_token` is only read
-- by the versioned variant, which rebuilds the fence at the business layer.
CREATE TABLE publication (
  business_key  text PRIMARY KEY,
  content       text NOT NULL,
  publisher     text NOT NULL,
  source_token  bigint NOT NULL,
  published_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
