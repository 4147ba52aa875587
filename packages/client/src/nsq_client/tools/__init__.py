"""NSQ's command-line tools, on the nsq_client library: nsq_tail, to_nsq, nsq_stat,
nsq_to_file, nsq_to_http and nsq_to_nsq. Each module has a ``main()``."""
