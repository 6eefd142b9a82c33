"""Push grading: the service that grades what students' autograding jobs hand it, the request and its checks,
the roster of repositories, what was last graded per branch, and the summary a push gets.
"""
