"""Who calls the Agent Service and what they may see and do: the caller a credential resolves to
(``resolver``), the rules every door applies (``caller``), and the routes' dependency (``deps``)."""
