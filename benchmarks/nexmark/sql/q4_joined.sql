-- Nexmark q4's first stage: every bid on an auction while the auction is open (from its
-- dateTime to its expires, both included), with the auction's category. Flink's q4
-- text writes a regular join (every auction and bid kept forever) with the time
-- condition in WHERE; here an interval join bounds the state: a bid is within one
-- minute after its auction (the generator's longest auction is 2 x the event time of
-- 100 auctions' events: 0.33 s at its 10,000 events/s, 33 s at the tests' 100/s; a
-- faster or slower generator needs another bound), and the join's WHERE compares the
-- bid's time with the auction's own end, which the interval cannot.
CREATE SOURCE auction (
  id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT, reserve BIGINT,
  expires BIGINT, seller BIGINT, category BIGINT, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.auction', bounded = true);

CREATE SOURCE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.bid', bounded = true);

INSERT INTO "nexmark.q4_joined"
SELECT A.id, A.category, B.price
FROM auction AS A JOIN bid AS B
  ON A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.dateTime + INTERVAL '1' MINUTE
WHERE B.dateTime <= A.expires;
