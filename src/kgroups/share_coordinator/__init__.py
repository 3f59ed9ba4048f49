"""The share coordinator (KIP-932): the durable state of share groups' partitions in
`__share_group_state`, as Kafka 4.3.1 keeps it, without I/O (the broker's
share_state_runtime appends its records and answers its APIs)."""
