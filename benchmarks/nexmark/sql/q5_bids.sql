-- Nexmark q5's first stage (the AuctionBids view): bids per auction in sliding 10 s
-- windows every 2 s. Not q5: q5 then keeps, per window, the auctions with the most
-- bids (a second aggregate over these results joined back to them).
CREATE SOURCE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.bid', partitioned_by = 'auction', bounded = true);

INSERT INTO "nexmark.q5_bids"
SELECT auction, COUNT(*) AS num, window_start, window_end
FROM HOP(bid, dateTime, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
GROUP BY auction, window_start, window_end;
