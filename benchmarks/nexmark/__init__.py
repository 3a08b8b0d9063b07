"""A Nexmark-style set for our service only: bids, and three pipelines over them."""
