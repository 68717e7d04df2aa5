"""The study's second edition: arms that each test a claim on the workload it was made for."""
