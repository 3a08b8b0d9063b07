-- Nexmark q4's second stage: the closing price of each auction, the highest of its bids
-- while it was open (q4_joined's rows), a running aggregate: an upsert stream keyed by
-- the auction, each auction's price rising as its bids come. Flink's text groups by
-- A.id, A.category; an auction has one category, so grouping by the auction makes the
-- same groups, and MAX(category) is that category: a column of the result the next
-- stage groups by (a composite key would be one text, "id|category").
CREATE SOURCE joined (
  value STRUCT<id BIGINT, category BIGINT, price BIGINT>
) WITH (topic = 'nexmark.q4_joined', bounded = true);

INSERT INTO "nexmark.q4_max"
SELECT value.id, MAX(value.price) AS final, MAX(value.category) AS category
FROM joined
GROUP BY value.id;
