-- Nexmark q2, selection: the bids on every 123rd auction.
CREATE SOURCE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.bid', partitioned_by = 'auction', bounded = true);

INSERT INTO "nexmark.q2"
SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0;
