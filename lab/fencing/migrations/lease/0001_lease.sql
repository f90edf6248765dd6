-- The lease store (SPEC §3.1). Lives alone in database lease26: the resource side cannot reach it.
CREATE TABLE lease (
  name        text PRIMARY KEY,
  holder      text NOT NULL,
  token       bigint NOT NULL CHECK (token > 0),
  expires_at  timestamptz NOT NULL
);
