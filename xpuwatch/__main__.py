"""``python -m xpuwatch``: the same command as the ``xpuwatch`` console script."""

from xpuwatch.entry import main

if __name__ == "__main__":
    main()
