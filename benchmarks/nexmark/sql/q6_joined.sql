-- Nexmark q6 (Beam's Query6), first stage: the bids that may win an auction, Beam's
-- WinningBids condition: a bid before the auction's end (expires, excluded) at or above
-- its reserve. Beam's auction window takes a bid from before the auction was created
-- too (the generator bids on up to 10 auctions not yet created), so the interval is a
-- minute either side of the auction's time (the generator's longest auction is 33 s at
-- the tests' 100 events/s, 0.33 s at its 10,000/s), and the join's WHERE compares the
-- bid with the auction's own end and reserve.
CREATE SOURCE auction (
  id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT, reserve BIGINT,
  expires BIGINT, seller BIGINT, category BIGINT, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.auction', bounded = true);

CREATE SOURCE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.bid', bounded = true);

INSERT INTO "nexmark.q6_joined"
SELECT A.id, A.seller, B.price, B.dateTime AS bid_time
FROM auction AS A JOIN bid AS B
  ON A.id = B.auction
 AND B.dateTime BETWEEN A.dateTime - INTERVAL '1' MINUTE AND A.dateTime + INTERVAL '1' MINUTE
WHERE B.dateTime < A.expires AND B.price >= A.reserve;
