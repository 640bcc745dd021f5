"""The git service: workflow branches, worktrees, checkpoint and recovery commits, diffs (dulwich).

Run it with ``python -m autarch.services.git``; talk to it with the contracts in
``autarch.contracts.git`` on the subjects ``autarch.svc.git.<verb>``.
"""
