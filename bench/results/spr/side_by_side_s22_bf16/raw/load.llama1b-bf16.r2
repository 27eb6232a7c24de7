 10:23:49 up 10:56,  0 user,  load average: 1.93, 0.99, 0.43
