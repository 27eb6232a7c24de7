 18:29:02 up  2:29,  0 user,  load average: 1.91, 1.67, 1.53
