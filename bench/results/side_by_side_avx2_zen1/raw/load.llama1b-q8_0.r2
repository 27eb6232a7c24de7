 02:28:05 up  1:08,  0 user,  load average: 1.94, 1.97, 2.00
