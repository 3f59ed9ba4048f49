"""The transaction coordinator, sans I/O: transactional ids, their producer ids and epochs, and
the two-phase end of each transaction, decided from requests and the time passed in; the state
moves only when the __transaction_state record a decision asks for is applied."""
