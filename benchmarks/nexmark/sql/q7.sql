-- Nexmark q7, highest bid: per 10 s tumbling window, the bid with the highest price,
-- with its auction, bidder, time and extra. MAX_BY returns a field of the row with the
-- largest price (ties: the earliest bid), where Flink's q7 text joins the maximum back
-- to the bids (and so returns every bid at a tied maximum).
CREATE SOURCE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.bid', partitioned_by = 'auction', bounded = true);

INSERT INTO "nexmark.q7"
SELECT MAX_BY(auction, price) AS auction, MAX(price) AS price,
       MAX_BY(bidder, price) AS bidder, MAX_BY(dateTime, price) AS dateTime,
       MAX_BY(extra, price) AS extra, window_start, window_end
FROM TUMBLE(bid, dateTime, INTERVAL '10' SECOND)
GROUP BY window_start, window_end;
