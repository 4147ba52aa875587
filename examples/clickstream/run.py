"""The file ``spark-submit`` runs (it wants a script): ``python -m clickstream``'s command line,
with the package itself coming from ``--py-files`` (see ``python -m clickstream package``)."""

from clickstream.__main__ import main

if __name__ == "__main__":
    main()
