-- Nexmark q6 (Beam's Query6), average selling price by seller: per seller, the average
-- price of its last 10 winning bids (q6_last10's rank rows, read as a table: a rank's
-- newest row is its row), with retractions as the ranks change. Beam rounds the average
-- to a whole number (Math.round); AVG here is a DOUBLE.
CREATE TABLE last10 (
  key VARCHAR, result STRUCT<partition VARCHAR, row STRUCT<result STRUCT<price BIGINT>>>,
  PRIMARY KEY (key) NOT ENFORCED
) WITH (topic = 'nexmark.q6_last10', bounded = true);

INSERT INTO "nexmark.q6"
SELECT result.partition AS seller, AVG(result.row.result.price) AS avg_price
FROM last10
GROUP BY result.partition;
