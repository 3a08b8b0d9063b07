-- Nexmark q3, local item suggestion: who sells in category 10 in Oregon, Idaho or
-- California: every auction joined with its seller, a regular (unbounded) join.
CREATE SOURCE auction (
  id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT, reserve BIGINT,
  expires BIGINT, seller BIGINT, category BIGINT, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.auction', bounded = true);

CREATE SOURCE person (
  id BIGINT, name VARCHAR, emailAddress VARCHAR, creditCard VARCHAR, city VARCHAR,
  state VARCHAR, extra VARCHAR, dateTime BIGINT,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (topic = 'nexmark.person', bounded = true);

INSERT INTO "nexmark.q3"
SELECT P.name, P.city, P.state, A.id
FROM auction AS A JOIN person AS P ON A.seller = P.id
WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA');
