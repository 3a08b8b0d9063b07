-- Nexmark q8, new users: the persons who opened an auction in the same 10 s tumbling
-- window as they registered, with the window's start. A semi window join: each person
-- of a window once, when an auction of theirs is in it (Flink's q8 text joins each
-- side's GROUP BY: distinct persons with distinct sellers; a person registers once, and
-- a semi join yields each left row once however many auctions match, so the rows are
-- the same).
CREATE SOURCE person (
  id BIGINT, name VARCHAR, emailAddress VARCHAR, creditCard VARCHAR, city VARCHAR,
  state VARCHAR, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.person', bounded = true);

CREATE SOURCE auction (
  id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT, reserve BIGINT,
  expires BIGINT, seller BIGINT, category BIGINT, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.auction', bounded = true);

INSERT INTO "nexmark.q8"
SELECT P.id, P.name, P.window_start AS starttime
FROM TUMBLE(person, dateTime, INTERVAL '10' SECOND) P
LEFT SEMI JOIN TUMBLE(auction, dateTime, INTERVAL '10' SECOND) A
  ON P.id = A.seller AND P.window_start = A.window_start AND P.window_end = A.window_end;
