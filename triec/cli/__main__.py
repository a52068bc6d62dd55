from triec.cli import main

main()
