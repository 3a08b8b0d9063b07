-- Nexmark q1, currency conversion: each bid's price in euros.
CREATE SOURCE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.bid', partitioned_by = 'auction', bounded = true);

INSERT INTO "nexmark.q1"
SELECT auction, bidder, 0.908 * price AS price, dateTime, extra FROM bid;
