"""Share groups' partitions (KIP-932): which records of a partition are available, acquired by a
member under a time lock, acknowledged or archived, and how often each was delivered."""
