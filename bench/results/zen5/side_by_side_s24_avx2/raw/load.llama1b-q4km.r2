 17:28:53 up  1:29,  0 user,  load average: 1.98, 1.96, 1.82
