-- Nexmark q7's first stage: the highest price per 10 s tumbling window. Not q7: q7
-- returns the bids at that price (the maximum joined back to the bids, or MAX_BY).
CREATE SOURCE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.bid', partitioned_by = 'auction', bounded = true);

INSERT INTO "nexmark.q7_max_price"
SELECT MAX(price) AS maxprice, window_start, window_end
FROM TUMBLE(bid, dateTime, INTERVAL '10' SECOND)
GROUP BY window_start, window_end;
