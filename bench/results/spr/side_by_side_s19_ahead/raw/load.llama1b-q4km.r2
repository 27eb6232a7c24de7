 00:53:03 up  1:26,  0 user,  load average: 1.89, 1.65, 1.71
