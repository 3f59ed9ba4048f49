"""__consumer_offsets record keys and values, and the ConsumerProtocol payloads inside them."""
