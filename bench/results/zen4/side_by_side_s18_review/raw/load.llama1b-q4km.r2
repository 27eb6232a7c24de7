 23:01:42 up  2:36,  0 user,  load average: 1.98, 1.83, 1.58
