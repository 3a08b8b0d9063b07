-- Nexmark q11 (user sessions): bids per bidder per session, a session ending after
-- 10 s without a bid.
CREATE SOURCE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.bid', partitioned_by = 'auction', bounded = true);

INSERT INTO "nexmark.q11"
SELECT bidder, COUNT(*) AS bid_count, window_start, window_end
FROM SESSION(bid, dateTime, INTERVAL '10' SECOND)
GROUP BY bidder, window_start, window_end;
