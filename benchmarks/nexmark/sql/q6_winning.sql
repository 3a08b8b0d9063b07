-- Nexmark q6 (Beam's Query6), second stage: each auction's winning bid, Beam's: the
-- highest price, the earliest bid on a tie (MAX_BY's tie goes to the earliest event
-- time: the bid's, the source's WATERMARK column). A running aggregate, an upsert
-- stream keyed by the auction; an auction has one seller (MAX of it is it).
CREATE SOURCE joined (
  value STRUCT<id BIGINT, seller BIGINT, price BIGINT, bid_time BIGINT>,
  WATERMARK FOR value.bid_time AS value.bid_time - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.q6_joined', bounded = true);

INSERT INTO "nexmark.q6_winning"
SELECT value.id, MAX(value.price) AS price, MAX_BY(value.bid_time, value.price) AS bid_time,
       MAX(value.seller) AS seller
FROM joined
GROUP BY value.id;
