 04:41:52 up  5:14,  0 user,  load average: 1.98, 1.85, 1.53
