-- Nexmark q0, pass-through: every bid as it is (the cost of reading and writing).
CREATE SOURCE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.bid', partitioned_by = 'auction', bounded = true);

INSERT INTO "nexmark.q0"
SELECT auction, bidder, price, dateTime, extra FROM bid;
