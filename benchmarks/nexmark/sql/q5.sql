-- Nexmark q5, hot items, second stage: per sliding window of q5's first stage
-- (q5_bids.sql: bids per auction, HOP 10 s / 2 s), the auction with the most bids. A
-- pipeline over the first one's result topic: each result record's key (the auction),
-- window and result.num are its columns, its event time the window's end (4 s of
-- delay: the first stage's tasks interleave in a result partition). The first
-- stage's windows end every 2 s, so a 2 s tumbling window over those ends holds one
-- window's results. MAX_BY keeps one auction on a tie (the earliest result, then the
-- first read), where Flink's q5 keeps every auction tied at the maximum.
CREATE SOURCE auction_bids (
  key VARCHAR, "window" STRUCT<start BIGINT, "end" BIGINT>, result STRUCT<num BIGINT>,
  WATERMARK FOR "window"."end" AS "window"."end" - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.q5_bids', bounded = true);

INSERT INTO "nexmark.q5"
SELECT MAX_BY(CAST(key AS BIGINT), result.num) AS auction, MAX(result.num) AS num,
       window_start, window_end
FROM TUMBLE(auction_bids, "window"."end", INTERVAL '2' SECOND)
GROUP BY window_start, window_end;
