"""The service layer: the order of operations (``pipeline``), the commit of a job
(``commit``), the lease of a claim (``lease``), the delivery policy (``delivery``) and the
ports they need of the world (``ports``). It imports no SDK."""
