 18:31:51 up 56 min,  0 user,  load average: 1.97, 1.90, 1.71
