-- Nexmark q4, average closing price per category: q4_max's upsert stream read as a
-- table (an auction's newest closing price is its row), averaged per category with
-- retractions: when an auction's price rises, its old price is taken back from its
-- category's average before the new one is added.
CREATE TABLE max_prices (
  key VARCHAR, result STRUCT<final BIGINT, category BIGINT>,
  PRIMARY KEY (key) NOT ENFORCED
) WITH (topic = 'nexmark.q4_max', bounded = true);

INSERT INTO "nexmark.q4"
SELECT result.category, AVG(result.final) AS final
FROM max_prices
GROUP BY result.category;
